// The Error values the public calls return: status, peer and connection in
// one message.
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

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

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// A code off the wire as the spec writes it: "0x02", "0x99".
std::string code_hex(Status code) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%02x", static_cast<unsigned>(static_cast<uint8_t>(code)));
  return b;
}

// A status that failed the peer's connection, as the peer gave it (CONN-8's
// DISCONNECT, CONN-3's REJECT): "kRemoteBadKey: remote key unknown or
// deregistered", or the raw code for one appendix A does not define.
std::string peer_failure_text(Status reason) {
  return is_known_status(reason)
             ? std::string(status_name(reason)) + ": " + std::string(status_text(reason))
             : "code " + hex(static_cast<uint8_t>(reason));
}

// CONN-8: the peer's DISCONNECT says whether it closed after the connection
// had failed there, and with what; "" for an orderly close.
std::string peer_reason_text(Status reason) {
  if (reason == Status::kOk) return {};
  return ", after it failed the connection with " + peer_failure_text(reason);
}

// The codes that put a connection in ERROR (CONN-8): a fatal NAK's, sent or
// received (NAK-2, NAK-3), kLocalProtection (MR-5), kPeerUnreachable
// (PATH-7, CONN-9) and kRnrRetryExceeded (LOSS-7). A REJECT carrying one
// answers a request repeated to a connection that had failed (CONN-3), not
// a refusal: the peer had accepted, and its ACCEPT was lost.
bool fails_a_connection(Status code) {
  const auto v = static_cast<uint8_t>(code);
  return (is_wire_nak_code(v) && code != Status::kRnr) || code == Status::kLocalProtection ||
         code == Status::kPeerUnreachable || code == Status::kRnrRetryExceeded;
}

}  // namespace

Error UdpEndpoint::Impl::address_fault_error(std::string_view what, std::string_view text,
                                             AddressFault f, int family, bool names_peer) noexcept {
  // The status is the fault's before any words are built: memory short for
  // them keeps it (a bad address stays kInvalidArgument).
  const Status s = address_fault_status(f);
  return error_or(s, ConnId{}, [&] {
    Error e;
    e.status = s;
    if (names_peer) e.peer = std::string(text);
    e.message = what.empty() ? address_fault_text(text, f, family)
                             : std::string(what) + " " + std::string(text) + ": " +
                                   address_fault_text(text, f, family);
    return e;
  });
}

Error parse_address_checked(std::string_view text, uint16_t default_port, PeerAddr& out) noexcept {
  const AddressFault f = address_fault(text, default_port, out, AF_UNSPEC, nullptr);
  if (f == AddressFault::kNone) return {};
  return UdpEndpoint::Impl::address_fault_error({}, text, f, AF_UNSPEC, false);
}

std::string count_text(uint64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

std::string UdpEndpoint::Impl::out_of_memory_text() noexcept {
  // Within the string's own buffer (std::string holds 15 characters without
  // an allocation in libstdc++, 22 in libc++): assigned, it allocates nothing.
  static_assert(kOutOfMemoryWords.size() <= 15);
  std::string text;
  text.assign(kOutOfMemoryWords);
  return text;
}

Error UdpEndpoint::Impl::out_of_memory_error(Status s, ConnId conn) noexcept {
  Error e;
  e.status = s;
  e.conn = conn.v;
  e.message = out_of_memory_text();
  return e;
}

// e's connection and peer (the connection's, unless e names one already),
// and the " (peer ..., conn ...)" that names them in a message.
std::string UdpEndpoint::Impl::name_in_error(Error& e, ConnId conn) const {
  e.conn = conn.v;
  if (e.peer.empty()) {
    auto it = conns.find(conn.v);
    PeerAddr p = it != conns.end() ? it->second.peer : eng->peer_of(conn);
    if (p.len != 0) e.peer = format_address(p);
  }
  if (e.peer.empty()) return conn_in_words(conn);
  return " (peer " + e.peer + (conn.v != 0 ? ", conn " + hex(conn.v) : std::string()) + ")";
}

std::string UdpEndpoint::Impl::conn_in_words(ConnId conn) {
  return conn.v != 0 ? " (conn " + hex(conn.v) + ")" : std::string();
}

Error UdpEndpoint::Impl::make_error(Status s, const std::string& what, ConnId conn) const {
  return make_error(s, what, conn, status_text(s));
}

Error UdpEndpoint::Impl::make_error(Status s, const std::string& what, ConnId conn,
                                    std::string_view text) const {
  Error e;
  e.status = s;
  e.message =
      what + name_in_error(e, conn) + ": " + std::string(status_name(s)) + ": " + std::string(text);
  return e;
}

std::string UdpEndpoint::Impl::ended_text(Status s, Status code) {
  switch (s) {
    case Status::kConnectRefused:
      // The engine passes the REJECT's code on (Event::reason): one that
      // CONN-4 names no refusal is shown raw, so that the peer's fault can be
      // traced; it read as a plain refusal. kOk: no REJECT came, but an
      // ACCEPT that CONN-3 refuses (it used to read as a REJECT).
      if (code == Status::kOk)
        return "the peer accepted offering an mtu below the least (256), which this endpoint "
               "refuses (CONNECT_ACCEPT)";
      if (code == Status::kConnectRefused)
        return "the peer refused the connection (CONNECT_REJECT)";
      // CONN-3: it read "not one of the spec's REJECT codes", a fault of
      // the peer's, where the peer had done as the spec says.
      if (fails_a_connection(code))
        return "the peer's connection had failed, with " + peer_failure_text(code) +
               ", before this end heard its ACCEPT (CONNECT_REJECT with code " + code_hex(code) +
               ", answering a repeated request: CONN-3)";
      return "the peer refused the connection (CONNECT_REJECT with code " + code_hex(code) +
             (is_known_status(code) ? " (" + std::string(status_name(code)) + ")" : "") +
             ", not one of the spec's REJECT codes)";
    case Status::kVersionMismatch:
      return "the peer speaks another protocol version (CONNECT_REJECT)";
    case Status::kResourceExhausted:
      // CONN-4: a peer short of memory for the request refuses it with the
      // same code as one at its limit; the code cannot tell which.
      return "the peer holds as many connections as its max_connections allows, or had no "
             "memory for this one (CONNECT_REJECT)";
    default: return request_failure_text(s);
  }
}

std::string UdpEndpoint::Impl::request_failure_text(Status s) {
  switch (s) {
    // A buffer outside its region is refused at the post (MR-3): a request,
    // or a connection, that fails kLocalProtection later met MR-5. The
    // status's own words ("local buffer outside a registered region") sent
    // the application looking for a bad range it never posted.
    case Status::kLocalProtection:
      return "memory a posted request used was deregistered while the request was outstanding "
             "(MR-5)";
    case Status::kRemoteOperationError:
      return "the peer failed the request for a fault of its own (REMOTE_OPERATION_ERROR; a "
             "reference peer sends it when the memory the request named was deregistered there "
             "under it, MR-5)";
    default: return std::string(status_text(s));
  }
}

// The engine's own words say only that the connection ended (closed,
// failed, or never connected): this says which, and by whom.
std::string UdpEndpoint::Impl::flushed_text(const ConnInfo* ci) {
  using Closer = ConnInfo::Closer;
  if (ci == nullptr) return "flushed: the connection ended before the request completed";
  if (ci->closer == Closer::kApplication)
    return "flushed: the application closed the connection (close(conn)) before the request "
           "completed";
  if (ci->closer == Closer::kEndpoint)
    return "flushed: the endpoint was closed (close()) before the request completed";
  if (ci->state == ConnState::kError) {
    // Section 4: a CONNECTING connection never enters ERROR; its connect fails.
    const bool connect =
        ci->status == Status::kConnectRefused || ci->status == Status::kVersionMismatch ||
        ci->status == Status::kResourceExhausted || ci->status == Status::kConnectTimeout;
    return connect ? "flushed: the connect failed first" : "flushed: the connection failed first";
  }
  if (ci->state == ConnState::kClosed && ci->status == Status::kPeerClosed)
    return "flushed: the peer closed the connection first";
  return "flushed: the connection ended before the request completed";
}

// The largest datagram is a full data packet: its headers (WRITE_IMM's, the
// longest), the payload and the ICRC, in UDP and IP. On a route whose MTU
// is smaller, IP fragments it, and fragments after the first carry no UDP
// ports: ECMP cannot spray them, and one lost fragment loses the packet. So
// the connection offers the mtu the route carries (CONN-1), and the peer
// agrees to the smaller of the two (CONN-3); a route too small for the
// least mtu is refused.
Error UdpEndpoint::Impl::route_mtu_cap(const PeerAddr& peer, uint16_t& cap) const {
  cap = 0;
  const uint32_t have = route_mtu(peer, family, local, scope);
  const uint32_t ip = address_is_v4(peer) ? 20 : 40;
  const uint32_t overhead = ip + 8 + wire::kMaxDataHeaderSize + wire::kIcrcSize;
  if (have == 0 || eng->config().mtu + overhead <= have) return {};
  if (have >= kMinMtu + overhead) {
    cap = static_cast<uint16_t>(have - overhead);
    return {};
  }
  return error_or(Status::kInvalidArgument, ConnId{}, [&] {
    Error e;
    e.status = Status::kInvalidArgument;
    e.peer = format_address(peer);
    e.message = "connect to " + e.peer + ": the route's MTU is " + std::to_string(have) +
                " bytes, too small for a data packet of the least mtu, " + std::to_string(kMinMtu) +
                ", and its " + std::to_string(overhead) +
                " bytes of headers: IP would fragment every packet, and ECMP cannot spray "
                "fragments";
    return e;
  });
}

std::string UdpEndpoint::Impl::send_failure_text(const SendFailure& f) {
  return f.err == 0 ? std::string() : std::string(f.call) + ": " + std::strerror(f.err);
}

std::string UdpEndpoint::Impl::send_failure_text(const PeerAddr& peer) const {
  return send_failure_text(send_failure_of(peer));
}

SendFailure UdpEndpoint::Impl::send_failure_of(const PeerAddr& peer) const {
  const auto it = send_failed.find(peer);
  return it == send_failed.end() ? SendFailure{} : it->second;
}

namespace {

// Which ICMP error a connected socket's errno stands for (note_refused), and
// what it tells the user, by the kernel's mapping (icmp_err_convert and
// icmpv6_err_convert; only the fatal ones reach a socket without IP_RECVERR).
std::string icmp_refusal_clause(int err) {
  const std::string why = " (" + std::string(std::strerror(err)) + "): ";
  switch (err) {
    case ECONNREFUSED:
      return "the peer's host answered with ICMP port unreachable" + why +
             "no socket listened at its port";
    case ENETUNREACH:  // network unknown (code 6) as well as network prohibited (9)
      return "the peer's network answered with ICMP destination unreachable, network unknown or "
             "administratively prohibited" +
             why +
             "a router knows no way to the peer's network, or a firewall rejected the datagrams";
    case EHOSTUNREACH:
    case EACCES:
      return "the peer's network answered with ICMP destination unreachable, administratively "
             "prohibited" +
             why + "a firewall or router rejected the datagrams";
    case EHOSTDOWN:
    case ENONET:
      return "the peer's network answered with ICMP destination unreachable, host unknown or "
             "isolated" +
             why + "a router knows no way to the peer's host";
    default:  // ENOPROTOOPT, EPROTO: protocol unreachable, parameter problem
      return "the peer's host answered with an ICMP error" + why + "it took no UDP datagrams";
  }
}

}  // namespace

std::string UdpEndpoint::Impl::send_failure_clause(const SendFailure& f) {
  if (f.err == 0) return {};
  if (f.icmp) return icmp_refusal_clause(f.err);
  return "the last send to the peer failed: " + send_failure_text(f);
}

std::string_view UdpEndpoint::Impl::connect_timeout_text(const ConnInfo& ci) {
  return ci.foreign_datagrams != 0 ? "no answer from the peer's address"
                                   : status_text(Status::kConnectTimeout);
}

std::string UdpEndpoint::Impl::failure_clauses(const ConnInfo& ci) {
  const std::string sent = send_failure_clause(ci.send_failure);
  const std::string foreign = foreign_clause(ci);
  return sent.empty() || foreign.empty() ? sent + foreign : sent + "; " + foreign;
}

std::string UdpEndpoint::Impl::foreign_clause(const ConnInfo& ci) {
  if (ci.foreign_datagrams == 0) return {};
  const uint64_t n = ci.foreign_datagrams;
  return std::to_string(n) + (n == 1 ? " datagram" : " datagrams") +
         " for this connection came from " + format_address(ci.foreign_src) +
         ", another host than the peer's (" + format_address(ci.peer) + "), and " +
         (n == 1 ? "was" : "were") +
         " dropped (spec BAD-8): a NAT between the two, or a peer that answers from another of "
         "its addresses";
}

Error UdpEndpoint::Impl::local_protection_error(const char* what, ConnId conn, uint64_t wr_id,
                                                uint64_t addr, uint32_t len, uint32_t lkey,
                                                uint32_t need) const {
  const auto range = [](uint64_t from, uint64_t n) {
    // (A range that runs past 2^64 ends there.)
    const uint64_t last = n - 1 > UINT64_MAX - from ? UINT64_MAX : from + n - 1;
    return std::to_string(n) + " bytes at " + hex64(from) + "-" + hex64(last);
  };
  std::string why;
  const auto it = regions.find(lkey);
  if (it == regions.end()) {
    why = "lkey " + std::to_string(lkey) +
          " names no registered region (never registered, or deregistered since)";
  } else if ((it->second.access & need) != need) {
    why = "lkey " + std::to_string(lkey) + "'s region lacks kAccessLocalWrite, which " +
          (std::string_view(what).starts_with("post_send") ? "a READ's local target"
                                                           : "a receive buffer") +
          " needs";
  } else {
    why = "the bytes are not all inside lkey " + std::to_string(lkey) + "'s region (" +
          range(it->second.base, it->second.length) + ")";
  }
  return make_error(Status::kLocalProtection,
                    std::string(what) + " wr_id " + std::to_string(wr_id) + ": " +
                        range(addr, len) + ", lkey " + std::to_string(lkey) + ") failed: " + why,
                    conn);
}

std::string UdpEndpoint::Impl::how_it_ended(const ConnInfo& ci) {
  const std::string how =
      ci.state == ConnState::kError && ci.status != Status::kOk
          ? "ended with " + std::string(status_name(ci.status)) + " (" +
                ended_text(ci.status, ci.peer_reason) + ")"
      : ci.status == Status::kPeerClosed
          ? "was closed by the peer (kPeerClosed" + peer_reason_text(ci.peer_reason) + ")"
          : "is closed";
  const std::string clauses = failure_clauses(ci);
  return clauses.empty() ? how : how + "; " + clauses;
}

// After close() the sockets are gone: a connect or an accept would only
// wait out its timeout. The connection (and its peer, still known) or the
// peer asked for are named as in every other error.
Error UdpEndpoint::Impl::closed_error(const std::string& what, ConnId conn,
                                      const std::string& peer) const {
  Error e;
  e.status = Status::kNotConnected;
  e.peer = peer;
  e.message = what + name_in_error(e, conn) +
              ": the endpoint is closed (close() was called); open a new one";
  return e;
}

Error UdpEndpoint::Impl::post_error(Status s, ConnId conn, const char* what) const {
  if (s == Status::kOk) return {};
  // The engine says only "not established" of a connection that ended, and
  // "unknown connection id" once it has let it go, while state() here still
  // reads kClosed or kError: name what ended it, which the application
  // otherwise has to ask for.
  auto it = conns.find(conn.v);
  if ((s == Status::kNotConnected || s == Status::kNoSuchConnection) && it != conns.end() &&
      (it->second.state == ConnState::kClosed || it->second.state == ConnState::kError)) {
    // A peer's DISCONNECT can end the connection between two posts, before
    // the application polls the kPeerClosed completions that say so.
    return error_or(Status::kNotConnected, conn, [&] {
      return make_error(Status::kNotConnected,
                        std::string(what) + " failed: the connection " + how_it_ended(it->second),
                        conn);
    });
  }
  // Closed by the application but not ended yet (its DISCONNECT unanswered):
  // the engine's "connection not established" read as one never set up.
  if (s == Status::kNotConnected && it != conns.end() &&
      it->second.closer == ConnInfo::Closer::kApplication)
    return make_error(
        s, std::string(what) + " failed: the application closed the connection (close(conn))", conn,
        "the connection is closing");
  return make_error(s, std::string(what) + " failed", conn);
}

}  // namespace metaroce::udp
